"""File transfers with scp/rsync over the master: models, errors, path rules, the capability probe,
running the transfer tool, SHA-256 verification and the manager.
"""
