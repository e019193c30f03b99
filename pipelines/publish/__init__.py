"""Publishing into the warehouse, one module per job.

- :mod:`.lock`: one writer publishes at a time (:class:`~.lock.WriterLock`);
- :mod:`.staging`: a writer's dlt pipeline, its staging slot and incoming dataset;
- :mod:`.columns`: a table takes the published rows' columns and types (LFD migration);
- :mod:`.merge`: the merge rule of each table (:data:`~.merge.MERGES`);
- :mod:`.transaction`: the publishing transaction (:func:`~.transaction.publish`);
- :mod:`.errors`: a failed write as one line.

:func:`pipelines.write.write` composes them: the one call of every writer.
"""
