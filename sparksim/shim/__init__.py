"""The `docker` stand-in of a simulated node, and the Ray stand-in it runs in containers."""
