"""Building and reading ELECTRA pretraining data: corpus -> packed TFRecords -> tf.data."""
