"""The sandbox profiles shipped with the executor (data files; see executor.sandbox.profiles)."""
