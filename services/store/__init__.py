"""Store: the platform's database (SQLAlchemy 2 models, Alembic migrations, idempotent repository functions).

    models.py      tables: prompts, responses, annotation_tasks, annotations, rankings, exports
    db.py          StoreConfig, create_engine_for(config), session_scope(engine), read_scope(engine); SQLite in WAL
    repository.py  add_sample, add_annotation, create_tasks, save_ranking, ... (each takes a Session)
    tasks.py       the annotation work queue: open tasks with their texts, one writer per prompt, QueueConfig and
                   how many of a prompt's tasks one person may take
    annotators.py  the queue's one claim rule (ListTasks and the page), who holds what
    assignments.py the claim rule of a human annotation; an operator's reassign and void
    filtered.py    the rule filter's verdict per response (kept out of annotation, with the reason)
    outbox.py      events stored with the change they announce, taken in order by one relay at a time (its
                   claim holds no transaction: an advisory lock per session, or a file lock beside SQLite)
    errors.py      StoreError and its subclasses
    migrate.py     upgrade(url): runs the Alembic migrations in migrations/ (the only way tables are made)

SQLite file by default, PostgreSQL at scale: the URL is the only difference.

    python -m services.store.migrate upgrade sqlite:///cheems.db
"""
