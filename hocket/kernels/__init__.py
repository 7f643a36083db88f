"""hocket.kernels"""
