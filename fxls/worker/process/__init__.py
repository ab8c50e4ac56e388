"""The worker's processes and isolation: the zygote, forked job children, sandbox layers.

Standard library only; torch is imported in the zygote by ``warmup`` alone. A job child hands
its job to ``fxls.worker.capture`` by kind.
"""
