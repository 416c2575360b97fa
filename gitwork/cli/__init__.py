"""The command-line face: parses arguments, builds command documents, prints results."""
