"""git_pf.rollouts: `git pf fanout`: N forks of an image, or of a recorded run at a step with a
changed reply, each running a command on an executor (local threads or Ray); the forks' images
sorted by score. Imports anything below the report and the CLI."""
