"""model/loading"""
