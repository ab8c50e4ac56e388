"""The ``rewrite`` job: fixes and refactors computed on a captured document, written back into
the source, and verified in the sandbox (``run.run_rewrite``)."""
