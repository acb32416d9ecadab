"""git_pf.ops: what a user does with images: snapshot, checkout, diff, fork, fsck, maintenance.
Operations reach layers only through the layer registry."""
