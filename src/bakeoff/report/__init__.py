"""Rendering only: terminal tables now, HTML and Markdown later. Reads values, measures nothing."""
