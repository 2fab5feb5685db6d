"""Nodes and lanes. Other apps use its public functions, imported normally:
`lanes.selectors` (lane_plan, plan_targets, current_revision, the lists), `lanes.services`
(every change, the observed/desired state setters, node state, network reports, captured
host keys) and `lanes.crypto` (the private key's format). lanes imports neither jobs nor
routing."""
