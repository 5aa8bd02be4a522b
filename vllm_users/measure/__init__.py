"""What is measured: the one record type, columns, metric definitions, histograms, client health, the result."""
