"""Text helpers below every layer: Accept negotiation, body text, JSON insertion, safe text."""
