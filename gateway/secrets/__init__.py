"""Secret entry that never passes through the model: the broker holding pending requests, the
one-time page, its listener and the askpass helper.
"""
