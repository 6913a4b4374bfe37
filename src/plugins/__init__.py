"""Built-in plugins. Each is registered through the ``infermatrix`` entry-point group, like a third-party one."""
