"""ops/triton"""
