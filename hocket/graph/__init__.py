"""hocket.graph"""
