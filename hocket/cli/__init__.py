"""hocket.cli"""
