"""Management datagrams: their numbers (consts), their structures as data (layouts, one
codec), the counters' facts (counters), and a MAD read and edited in place (view)."""
