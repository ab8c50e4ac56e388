"""The ``compile`` job: each class's ``forward`` compiled with TorchDynamo and an eager backend,
its graph breaks named by kind (FX6xx) at the document's lines."""
