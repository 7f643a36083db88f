"""hocket.hardware"""
