"""Port forwards as dedicated ``ssh -N`` processes: models, errors, the process, its state record,
health checks and the manager.
"""
