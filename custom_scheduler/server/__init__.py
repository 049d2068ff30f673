"""Running the daemon: the composition root (app), the process (daemon), leader election,
health and metrics serving, delegated authentication, config reload and logging."""
