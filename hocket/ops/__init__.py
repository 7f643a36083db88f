"""hocket.ops"""
