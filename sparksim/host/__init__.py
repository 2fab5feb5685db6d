"""Per-node host stand-ins: fake /sys and /proc, nvidia-smi, ibdev2netdev, ip, ping, perftest."""
