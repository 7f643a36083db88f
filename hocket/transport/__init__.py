"""hocket.transport"""
