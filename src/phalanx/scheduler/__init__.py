"""The scheduler: a queue per compute target, its capacity, devices for every node.

``policy.decide`` is the rule (pure); ``placement`` finds room on a target's
hosts; ``model`` holds the values both reason about.
"""
