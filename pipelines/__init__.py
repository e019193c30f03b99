"""freetime's data layer: the Terminal49 client and dlt source, the warehouse, the analytics.

Nothing in this package imports Prefect or the sandbox.
"""
