"""The fabric checks (NCCL bus bandwidth, RDMA latency matrix, link bandwidth) and the RDMA watchdog."""
