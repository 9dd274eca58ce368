"""Each agent framework's real agent over swerve (docs/frameworks.md), primary failing."""
