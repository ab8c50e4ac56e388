"""What ``fxls check`` prints: text for people, JSON (schema version 1), GitHub Actions
workflow commands and SARIF 2.1.0. Command-line side only: the language server never imports
this package."""

FORMATS = ("text", "json", "github", "sarif")
