"""Shapes on the qnn backend: shape buckets for growing dims (rules, certificates, generative loops) and shape
specialization that binds the call's input shapes only."""
