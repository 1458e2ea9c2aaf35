"""The Spark data source ``format("sparklog")``: the only part of sparklog that imports pyspark."""
