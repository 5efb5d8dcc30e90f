"""The ``eagle-hal`` subcommands, one module each (see ``eagle_hal.cli.COMMANDS``)."""
