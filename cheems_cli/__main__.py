"""`python -m cheems_cli ...` is `cheems ...`."""

from cheems_cli.main import app

app()
