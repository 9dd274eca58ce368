"""What a request must look like for the route it goes to: the wire rules (:mod:`.rules`) and
their walk over raw JSON bodies (:mod:`.payloads`). Adapters use them through
:mod:`swerve.adapters`."""
