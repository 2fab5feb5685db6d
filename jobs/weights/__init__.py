"""Model files on the nodes (DESIGN §12): the inventory, the download and sync jobs and
their progress. Paths and names: lanes.model_files; the launch's weights check: lanes.plans."""
