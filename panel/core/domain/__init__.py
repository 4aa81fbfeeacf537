"""What every app's domain code shares: the choice sets and their colours, the rules for names and labels,
numbers in words, texts kept in parts and translated where shown, and the panel's own errors."""
