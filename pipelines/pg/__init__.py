"""The warehouse on a PostgreSQL server (``FREETIME_WAREHOUSE=postgresql://...``).

The same tables, merge rules and guarantees as the DuckDB file, in PostgreSQL's dialect:

- :mod:`.connection`: connections (the password from the URL, ``PGPASSWORD``, ``~/.pgpass`` or
  the dlt secret ``destination.postgres.credentials``), one-line errors that never show it;
- :mod:`.lock`: one writer at a time across machines, with an advisory lock of the database;
- :mod:`.publish`: one PostgreSQL transaction publishes a staged load by the rules of
  :data:`pipelines.write.MERGES`, with its history rows and its ``freetime_loads`` row;
- :mod:`.write`: dlt's postgres destination stages the load, then :mod:`.publish`;
- :mod:`.load`: ``freetime load`` on PostgreSQL (:func:`pipelines.load.run_load` dispatches);
- :mod:`.risk`: the risk run (:func:`pipelines.analytics.publish_risk` dispatches), its tables,
  with :mod:`.views` (the views, the alerts);
- :mod:`.read`: readers (the report, the notebooks) in read-only snapshots.
"""
