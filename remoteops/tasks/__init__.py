"""Long-running remote tasks that survive a gateway restart: models, the remote sh programs
(``scripts``), the wire that runs them, upkeep (checks, reconciliation, retention) and the manager.
"""
