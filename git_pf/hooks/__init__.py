"""git_pf.hooks: the git hook scripts ``git pf install`` chains into a repository.

Hooks never overwrite a user's hook: the user's hook keeps running and can
still veto (docs/transport.md).
"""
