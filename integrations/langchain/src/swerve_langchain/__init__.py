"""swerve for LangChain."""
