"""One module per fix kind; each has ``propose(original, fix) -> Proposal``."""
