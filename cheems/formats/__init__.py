"""Data formats: the official CheemsBench / CheemsPreference / rewards jsonl, the community layouts, files of any kind.
Ground floor like the rest of `cheems`: imports only `cheems.errors` and third-party packages."""
