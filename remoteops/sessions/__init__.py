"""Persistent shell sessions on the target's tmux: models, the remote sh programs, the wire, reading
screens and output, and the manager.
"""
