"""Nodes and lanes. Other apps use its public functions, imported normally:
`lanes.selectors` (lane_plan, plan_targets, current_revision, the lists),
`lanes.node_services` (node changes, node state, network reports, captured host keys),
`lanes.lane_services` (lane changes), `lanes.lane_states` (the observed/desired state
setters), `lanes.crypto` (the private key's format, secret env encryption),
`lanes.secrets` (the `[secret]` mark and filling a command in the worker) and
`lanes.watcher` (the health watcher's tick). lanes imports neither jobs nor routing."""
