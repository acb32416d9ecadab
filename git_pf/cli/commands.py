"""Imports every command module so its commands register on the app."""
from . import cmd_blame, cmd_fanout, cmd_images, cmd_integrations, cmd_merge, cmd_model, cmd_mount, cmd_refs, cmd_report, cmd_repo, cmd_runs, cmd_serve, cmd_server, cmd_snapshot, cmd_transport, cmd_tree, cmd_verify  # noqa: F401
