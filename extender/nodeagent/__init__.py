"""The node agent: a node's own hugepage counters, published as one small record per node.

``counters`` is pure (text in, frozen values out); ``probe`` reads the files;
``record`` is the published shape; ``publish`` writes it with least privilege.
"""
