"""The chaos soak: `cheems up` under steady load through the real clients while a random process of any service is
SIGKILLed on a period, then `cheems up` itself; afterwards every acknowledged write is checked against the store,
the bus and the logs.

    cheems dev soak --minutes 2 --out out/soak            # SQLite; --db postgresql+psycopg://... for PostgreSQL

Modules: `config` (SoakConfig), `ledger` (what each client was told), `load` (the clients), `chaos` (the process
tree, kills and recoveries), `checks` (acknowledged against stored and published), `run` (the whole soak and its
report).
"""
