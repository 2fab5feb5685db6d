"""sparksim: a simulated DGX Spark cluster that answers like vLLM, docker and the host tools.

No Django here: the portal's tests and demo start it as separate processes.
"""
