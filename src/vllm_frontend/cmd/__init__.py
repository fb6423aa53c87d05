"""Process startup: argument parsing for the subcommands, inherited sockets, managed engines."""
