"""The dashboard's secondary screens: one task in detail, and the yes/no question before an action."""
