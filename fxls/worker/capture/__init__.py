"""What a job child computes with torch: execute the document, build, trace, shapes,
named arguments, graph checks. Never imports ``fxls.worker.process``.
"""
