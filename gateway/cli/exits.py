"""The `mendpoint` command's exit statuses: 0 done, 1 invalid input or config, 2 usage."""

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2
