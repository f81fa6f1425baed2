"""The captured program, below everything that compiles or runs it.

- ``ir``: ``TensorSpec``, ``DeviceData``, ``Value`` and ``Node``, each node's
  structural key made once at creation (``make_node``, ``node_key``).
- ``program``: ``Graph.build(outputs)`` cuts pending Values into a program
  (inputs = device data, nodes in order, outputs) with its sha256 key.
- ``argtree``: the flat argument lists nodes keep, and back.
- ``debug``: the user's source line of each op, and why a graph recompiled.

Imports only torch and the bottom layer (``metrics``, ``config``, ``targets``).
"""
