"""Getting a graph of ``forward``: the span-recording tracer, the replay of identical blocks,
strategies and repairs, the fake run for code FX cannot trace, and the graph checks."""
