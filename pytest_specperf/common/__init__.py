"""What every stage may use and none owns: secret redaction, atomic JSON files, the readiness probe,
and SIGTERM read as Ctrl-C. Nothing here imports a stage, so any module can import it."""
