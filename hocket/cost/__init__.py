"""hocket.cost"""
